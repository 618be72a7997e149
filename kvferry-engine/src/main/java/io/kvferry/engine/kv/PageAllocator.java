package io.kvferry.engine.kv;

import java.util.ArrayDeque;

/**
 * Free lists of one engine's page ids and aux rows (the same ids on every shard of the engine).
 * Owned by the engine's scheduler thread: not thread-safe, by design. A request that cannot get its
 * pages waits in its queue; nothing fails for want of pages.
 */
public final class PageAllocator {
    private final int pages, rows;
    private final ArrayDeque<Integer> freePages = new ArrayDeque<>();
    private final ArrayDeque<Integer> freeRows = new ArrayDeque<>();
    private final boolean[] pageTaken;
    private final boolean[] rowTaken;

    public PageAllocator(int pages, int rows) {
        this.pages = pages;
        this.rows = rows;
        pageTaken = new boolean[pages];
        rowTaken = new boolean[rows];
        for (int p = 0; p < pages; p++) freePages.add(p);
        for (int r = 0; r < rows; r++) freeRows.add(r);
    }

    public boolean canAllocate(int n) {
        return freePages.size() >= n && !freeRows.isEmpty();
    }

    public boolean hasFreeRow() {
        return !freeRows.isEmpty();
    }

    public int freePages() {
        return freePages.size();
    }

    public int totalPages() {
        return pages;
    }

    public int freeRows() {
        return freeRows.size();
    }

    public int totalRows() {
        return rows;
    }

    /** Pages and rows handed out and not returned. */
    public int outstanding() {
        return (pages - freePages.size()) + (rows - freeRows.size());
    }

    public int[] allocatePages(int n) {
        if (freePages.size() < n) throw new IllegalStateException("need " + n + " pages, " + freePages.size() + " free");
        int[] out = new int[n];
        for (int i = 0; i < n; i++) {
            out[i] = freePages.poll();
            pageTaken[out[i]] = true;
        }
        return out;
    }

    public void freePages(int[] ps) {
        for (int p : ps) {
            if (!pageTaken[p]) throw new IllegalStateException("page " + p + " freed twice");
            pageTaken[p] = false;
            freePages.add(p);
        }
    }

    public int allocateRow() {
        Integer r = freeRows.poll();
        if (r == null) throw new IllegalStateException("no free aux row");
        rowTaken[r] = true;
        return r;
    }

    public void freeRow(int row) {
        if (!rowTaken[row]) throw new IllegalStateException("aux row " + row + " freed twice");
        rowTaken[row] = false;
        freeRows.add(row);
    }
}
