package io.kvferry.api;

import java.lang.foreign.Arena;

/** Test fixture: the args of a small rank 0 (eight 1 KiB bf16 KV pages, eight 64-byte aux rows) from {@code arena}. */
public final class SmallRankArgs {
    private SmallRankArgs() {
    }

    public static KVArgs of(Arena arena, int pageSize) {
        KVArgs args = new KVArgs();
        args.engineRank = 0;
        args.pageSize = pageSize;
        args.kvCacheDtypeStr = "bf16";
        args.addKvBuffer(arena.allocate(8 * 1024, 64), 1024);
        args.addAuxBuffer(arena.allocate(8 * 64, 64), 64);
        return args;
    }
}
