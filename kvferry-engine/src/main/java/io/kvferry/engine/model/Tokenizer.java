package io.kvferry.engine.model;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CoderResult;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Map;
import java.util.Objects;
import java.util.PriorityQueue;

/**
 * A llama2.c BPE tokenizer with the semantics of {@code run.c}'s {@code encode} and {@code decode}.
 *
 * <p>Pieces are byte strings. They are kept as ISO-8859-1 strings (one char per byte), so every byte
 * sequence maps exactly and lookups are plain {@link HashMap} hits. Immutable, so thread-safe once built.
 */
public final class Tokenizer {
    /** Beginning of sequence, as llama2.c. */
    public static final int BOS = 1;
    /** End of sequence, as llama2.c. */
    public static final int EOS = 2;

    /**
     * Whether a generated token ends the sequence: EOS, or BOS. llama2.c's checkpoints (stories260K and
     * the other TinyStories models) were trained on stories each opened by BOS and never closed by EOS,
     * so a story ends when the model starts the next one: it emits BOS, never EOS. run.c stops there
     * ("the BOS (=1) token delimits sequences": {@code if (next == 1) break;}); a generation that went
     * on would glue a second story to the first. The ending token is an output token (counted, in the
     * token ids) but no text, as EOS.
     */
    public static boolean endsSequence(int token) {
        return token == EOS || token == BOS;
    }

    /** Byte fallback: byte b is token b + 3 (ids 3..258), as run.c assumes. */
    private static final int BYTE_OFFSET = 3;
    private static final int SYNTHETIC_MIN_VOCAB = BYTE_OFFSET + 256;
    /** run.c's starting best score: a merge must score strictly above it. */
    private static final float NO_MERGE = -1e10f;

    private final String[] pieces;
    private final float[] scores;
    private final Map<String, Integer> ids;
    /** Decoded bytes of each token: after any token but BOS, and after BOS (one leading space stripped). */
    private final byte[][] decoded;
    private final byte[][] decodedAfterBos;
    /** Id of the piece " " (run.c's dummy prefix), or -1 if the vocab lacks it. */
    private final int spaceId;
    /** Most bytes of text one token stands for: a prompt of n bytes needs at least n / this many tokens. */
    private final int maxTokenBytes;

    private Tokenizer(String[] pieces, float[] scores) {
        this.pieces = pieces;
        this.scores = scores;
        int n = pieces.length;
        Map<String, Integer> map = HashMap.newHashMap(n);
        decoded = new byte[n][];
        decodedAfterBos = new byte[n][];
        for (int i = 0; i < n; i++) {
            // Duplicate pieces: the lowest id wins (run.c's bsearch picks an arbitrary one).
            map.putIfAbsent(pieces[i], i);
            decoded[i] = decodePiece(pieces[i], false);
            decodedAfterBos[i] = decodePiece(pieces[i], true);
        }
        this.ids = map;
        this.spaceId = map.getOrDefault(" ", -1);
        int longest = 1;
        for (byte[] d : decoded) longest = Math.max(longest, d.length);
        this.maxTokenBytes = longest;
    }

    /**
     * Reads a llama2.c tokenizer file: int32 max_token_length, then per token float32 score, int32
     * length and that many bytes, all little-endian. The vocab size is not in the file; it comes from
     * the checkpoint.
     */
    public static Tokenizer load(Path file, int vocabSize) throws IOException {
        Objects.requireNonNull(file, "file");
        if (vocabSize <= 0) {
            throw new IllegalArgumentException("tokenizer " + file + ": vocab size must be positive, got " + vocabSize);
        }
        ModelFiles.requireRegularFile(file, "tokenizer");
        byte[] all;
        try {
            all = Files.readAllBytes(file);
        } catch (IOException e) {
            throw new IOException("cannot read tokenizer " + file + ": " + e.getMessage(), e);
        }
        ByteBuffer in = ByteBuffer.wrap(all).order(ByteOrder.LITTLE_ENDIAN);
        String[] pieces = new String[vocabSize];
        float[] scores = new float[vocabSize];
        int token = -1;
        try {
            int maxTokenLength = in.getInt();
            if (maxTokenLength < 0) {
                throw new IOException("tokenizer " + file + ": negative max_token_length " + maxTokenLength);
            }
            for (token = 0; token < vocabSize; token++) {
                scores[token] = in.getFloat();
                int length = in.getInt();
                if (length < 0) {
                    throw new IOException("tokenizer " + file + ": token " + token + " has negative length " + length
                            + " (at byte " + (in.position() - 4) + ")");
                }
                if (length > in.remaining()) {
                    throw new IOException("tokenizer " + file + " is truncated: token " + token + " needs " + length
                            + " bytes at offset " + in.position() + " but only " + in.remaining() + " remain (file has "
                            + all.length + " bytes, vocab size " + vocabSize + ")");
                }
                pieces[token] = new String(all, in.position(), length, StandardCharsets.ISO_8859_1);
                in.position(in.position() + length);
            }
        } catch (BufferUnderflowException e) {
            throw new IOException("tokenizer " + file + " is truncated: it ends (" + all.length + " bytes) "
                    + (token < 0 ? "before max_token_length" : "inside the header of token " + token)
                    + " of " + vocabSize, e);
        }
        if (in.hasRemaining()) {
            // Extra bytes mean the file holds more tokens than the checkpoint says: a mismatched pair.
            throw new IOException("tokenizer " + file + " has " + in.remaining() + " bytes after its " + vocabSize
                    + " tokens: the vocab size does not match this file");
        }
        return new Tokenizer(pieces, scores);
    }

    /**
     * A tokenizer for random-weight engines without a tokenizer file: llama2.c's special pieces and
     * byte pieces, then placeholder pieces {@code <tN>} that encode never produces (no pair of byte
     * pieces concatenates to one) but that decode to their own text.
     */
    public static Tokenizer synthetic(int vocabSize) {
        if (vocabSize < SYNTHETIC_MIN_VOCAB) {
            throw new IllegalArgumentException("a synthetic tokenizer needs a vocab of at least " + SYNTHETIC_MIN_VOCAB
                    + " (3 specials + 256 bytes), got " + vocabSize);
        }
        String[] pieces = new String[vocabSize];
        pieces[0] = "<unk>";
        pieces[BOS] = "\n<s>\n";
        pieces[EOS] = "\n</s>\n";
        for (int b = 0; b < 256; b++) {
            pieces[BYTE_OFFSET + b] = String.format("<0x%02X>", b);
        }
        for (int i = SYNTHETIC_MIN_VOCAB; i < vocabSize; i++) {
            pieces[i] = "<t" + i + ">";
        }
        return new Tokenizer(pieces, new float[vocabSize]);
    }

    /**
     * The most UTF-8 bytes of text one token encodes (at least 1). A text of n bytes encodes to at least
     * {@code ceil(n / maxTokenBytes())} tokens, which lets a caller refuse a text too long for a context
     * without encoding it.
     */
    public int maxTokenBytes() {
        return maxTokenBytes;
    }

    public int vocabSize() {
        return pieces.length;
    }

    /**
     * run.c's {@code encode}: optional BOS; the dummy-prefix token " " when the text is non-empty; each
     * UTF-8 codepoint as its piece or else as byte-fallback tokens; then merging, over and over, the
     * adjacent pair whose concatenation is a piece with the highest score (leftmost on ties); optional EOS.
     *
     * <p>Vocabs without a " " piece (the synthetic one) get no dummy prefix, where run.c would emit the
     * invalid id -1; text then round-trips through byte fallback.
     */
    public int[] encode(String text, boolean bos, boolean eos) {
        Objects.requireNonNull(text, "text");
        byte[] utf8 = text.getBytes(StandardCharsets.UTF_8);
        int[] tokens = new int[utf8.length + 3];
        int n = 0;
        if (bos) tokens[n++] = BOS;
        int mergeStart = n;
        if (utf8.length > 0 && spaceId >= 0) tokens[n++] = spaceId;
        int i = 0;
        while (i < utf8.length) {
            // One codepoint: a lead byte and the continuation bytes after it, at most 4, as run.c groups them.
            int end = i + 1;
            while (end < utf8.length && end - i < 4 && (utf8[end] & 0xC0) == 0x80) end++;
            Integer id = ids.get(new String(utf8, i, end - i, StandardCharsets.ISO_8859_1));
            if (id != null) {
                tokens[n++] = id;
            } else {
                for (int k = i; k < end; k++) {
                    int fallback = (utf8[k] & 0xFF) + BYTE_OFFSET;
                    if (fallback >= pieces.length) {
                        throw new IllegalArgumentException("cannot encode byte 0x" + Integer.toHexString(utf8[k] & 0xFF)
                                + ": vocab of " + pieces.length + " has no byte-fallback token " + fallback);
                    }
                    tokens[n++] = fallback;
                }
            }
            i = end;
        }
        n = mergeStart + merge(tokens, mergeStart, n - mergeStart);
        if (eos) tokens[n++] = EOS;
        return Arrays.copyOf(tokens, n);
    }

    /** A candidate merge of the adjacent nodes left and right, valid while both still hold the versions seen. */
    private record Candidate(float score, int left, int right, int leftVersion, int rightVersion, int merged) {}

    /**
     * The BPE merge loop over tokens[from, from+count). run.c rescans all pairs per merge (quadratic);
     * a heap ordered by (score desc, position asc) over a linked list picks the same pair each step,
     * because merging keeps the list order, so a node's original index orders it by position.
     * Returns the merged count, written back in place.
     */
    private int merge(int[] tokens, int from, int count) {
        if (count < 2) return count;
        int[] id = Arrays.copyOfRange(tokens, from, from + count);
        int[] next = new int[count];
        int[] prev = new int[count];
        int[] version = new int[count];
        for (int k = 0; k < count; k++) {
            next[k] = k + 1 < count ? k + 1 : -1;
            prev[k] = k - 1;
        }
        PriorityQueue<Candidate> heap = new PriorityQueue<>((a, b) -> {
            // Plain float comparison as run.c (-0.0 ties 0.0); NaN candidates never enter.
            if (a.score > b.score) return -1;
            if (a.score < b.score) return 1;
            return Integer.compare(a.left, b.left);
        });
        for (int k = 0; k + 1 < count; k++) offer(heap, id, version, k, k + 1);
        int alive = count;
        while (!heap.isEmpty()) {
            Candidate c = heap.poll();
            if (next[c.left] != c.right || version[c.left] != c.leftVersion || version[c.right] != c.rightVersion) {
                continue; // stale: a neighbour merged since this was offered
            }
            id[c.left] = c.merged;
            version[c.left]++;
            int after = next[c.right];
            next[c.left] = after;
            if (after >= 0) prev[after] = c.left;
            next[c.right] = -1;
            version[c.right]++;
            alive--;
            if (prev[c.left] >= 0) offer(heap, id, version, prev[c.left], c.left);
            if (after >= 0) offer(heap, id, version, c.left, after);
        }
        int out = from;
        for (int k = 0; k >= 0; k = next[k]) tokens[out++] = id[k];
        assert out - from == alive;
        return alive;
    }

    private void offer(PriorityQueue<Candidate> heap, int[] id, int[] version, int left, int right) {
        Integer merged = ids.get(pieces[id[left]].concat(pieces[id[right]]));
        if (merged == null) return;
        float score = scores[merged];
        if (score > NO_MERGE) { // false for NaN too, as in run.c
            heap.add(new Candidate(score, left, right, version[left], version[right], merged));
        }
    }

    /**
     * run.c's {@code decode}: the token's piece bytes, with one leading space stripped when prevToken is
     * BOS, and a {@code <0xXX>} piece turned into its single raw byte. Returns a fresh array.
     */
    public byte[] pieceBytes(int prevToken, int token) {
        return decodedBytes(prevToken, token).clone();
    }

    private byte[] decodedBytes(int prevToken, int token) {
        if (token < 0 || token >= pieces.length) {
            throw new IllegalArgumentException("token " + token + " is out of range for a vocab of " + pieces.length);
        }
        return prevToken == BOS ? decodedAfterBos[token] : decoded[token];
    }

    /**
     * The token as a logprobs answer names it: a text piece's own text (UTF-8, its leading space kept), and a byte
     * ({@code <0xXX>}) or special ({@code <s>}, {@code </s>}) piece as the piece itself, so two tokens have two names
     * (the byte 'a' and the piece "a" are different tokens). {@link #pieceBytes} gives what it adds to the text.
     */
    public String tokenText(int token) {
        if (token < 0 || token >= pieces.length) {
            throw new IllegalArgumentException("token " + token + " is out of range for a vocab of " + pieces.length);
        }
        String piece = pieces[token];
        if (token == BOS || token == EOS || bytePieceValue(piece) >= 0) return piece;
        return new String(piece.getBytes(StandardCharsets.ISO_8859_1), StandardCharsets.UTF_8);
    }

    /**
     * The bytes the token adds to a text, after any token but BOS: none for BOS and EOS, a byte piece's one byte, a text
     * piece's UTF-8 (the part of a character a byte token holds, as OpenAI's logprobs {@code bytes}). A fresh array.
     */
    public byte[] tokenBytes(int token) {
        if (token == BOS || token == EOS) return new byte[0];
        return decodedBytes(-1, token).clone();
    }

    /**
     * Decodes a whole sequence as UTF-8 (malformed bytes become U+FFFD). BOS and EOS produce no text; a
     * token right after BOS loses its leading space as in run.c; the first token's predecessor is none.
     */
    public String decode(int[] tokens) {
        Objects.requireNonNull(tokens, "tokens");
        ByteArrayOutputStream out = new ByteArrayOutputStream(tokens.length * 4);
        int prev = -1;
        for (int token : tokens) {
            byte[] bytes = decodedBytes(prev, token); // validates the range, BOS/EOS included
            if (token != BOS && token != EOS) out.write(bytes, 0, bytes.length);
            prev = token;
        }
        return out.toString(StandardCharsets.UTF_8);
    }

    /** A stream decoder for one request's tokens, starting as if right after BOS. */
    public TextStream textStream() {
        return new TextStream(this, BOS);
    }

    /** A stream decoder whose first token follows previousToken (e.g. the prompt's last token). */
    public TextStream textStream(int previousToken) {
        return new TextStream(this, previousToken);
    }

    private static byte[] decodePiece(String piece, boolean afterBos) {
        // Order as run.c: strip the space first, then recognise a byte piece.
        if (afterBos && !piece.isEmpty() && piece.charAt(0) == ' ') piece = piece.substring(1);
        int b = bytePieceValue(piece);
        if (b >= 0) return new byte[] {(byte) b};
        return piece.getBytes(StandardCharsets.ISO_8859_1);
    }

    /** The byte of a piece of exactly the form {@code <0xHH>}, else -1. */
    private static int bytePieceValue(String piece) {
        if (piece.length() != 6 || !piece.startsWith("<0x") || piece.charAt(5) != '>') return -1;
        int hi = Character.digit(piece.charAt(3), 16);
        int lo = Character.digit(piece.charAt(4), 16);
        return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
    }

    /**
     * Turns generated tokens into text as they arrive: holds back an incomplete UTF-8 sequence until it
     * completes, replaces invalid bytes with U+FFFD, and emits nothing for BOS and EOS. Tracks the
     * previous token itself for run.c's after-BOS space stripping. One per request; not thread-safe.
     */
    public static final class TextStream {
        private final Tokenizer tokenizer;
        private final CharsetDecoder decoder = StandardCharsets.UTF_8.newDecoder()
                .onMalformedInput(CodingErrorAction.REPLACE)
                .onUnmappableCharacter(CodingErrorAction.REPLACE);
        private byte[] pending = new byte[16];
        private int pendingLength;
        private int prev;

        /** Starts as if right after BOS, so the first token's leading space is stripped. */
        public TextStream(Tokenizer tokenizer) {
            this(tokenizer, BOS);
        }

        public TextStream(Tokenizer tokenizer, int previousToken) {
            this.tokenizer = Objects.requireNonNull(tokenizer, "tokenizer");
            this.prev = previousToken;
        }

        /** Adds one token; returns the text completed by it (maybe ""). */
        public String push(int token) {
            byte[] bytes = tokenizer.decodedBytes(prev, token);
            prev = token;
            if (token == BOS || token == EOS) return "";
            if (pendingLength + bytes.length > pending.length) {
                pending = Arrays.copyOf(pending, Math.max(pending.length * 2, pendingLength + bytes.length));
            }
            System.arraycopy(bytes, 0, pending, pendingLength, bytes.length);
            pendingLength += bytes.length;
            return drain(false);
        }

        /** Ends the stream: any held-back incomplete sequence comes out as U+FFFD. The stream can then go on afresh. */
        public String finish() {
            String text = drain(true);
            decoder.reset();
            return text;
        }

        private String drain(boolean endOfInput) {
            ByteBuffer in = ByteBuffer.wrap(pending, 0, pendingLength);
            // UTF-8 never yields more chars than bytes (a 4-byte sequence is 2 chars, a bad byte 1).
            CharBuffer out = CharBuffer.allocate(pendingLength + 1);
            CoderResult result = decoder.decode(in, out, endOfInput);
            if (endOfInput && result.isUnderflow()) result = decoder.flush(out);
            if (result.isError() || result.isOverflow()) {
                throw new IllegalStateException("UTF-8 stream decoding failed: " + result); // unreachable with REPLACE
            }
            // Keep the unconsumed tail (an incomplete sequence, at most 3 bytes) for the next push.
            int rest = in.remaining();
            System.arraycopy(pending, in.position(), pending, 0, rest);
            pendingLength = rest;
            out.flip();
            return out.toString();
        }
    }
}
