package io.kvferry.engine.model;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class TokenizerTest {
    private static final int VOCAB = 512;
    private static final List<String> SAMPLES = List.of(
            "Once upon a time",
            "Hello, world! 1234567890 (a+b)*c; \"quoted\" 'single' - dash... ?!",
            "line one\nline two\n\n\ttabbed\r\n",
            "  leading spaces and trailing  ",
            "café crème brûlée é",
            "日本語のテキスト 日本",
            "emoji 😀🎉 and 👍🏽 mixed",
            "x",
            " ");

    /** The shared test models folder: tried as the module's ../../shared, the repo's ../shared, then -Dkvferry.models. */
    private static Path modelsDir() {
        List<Path> candidates = new ArrayList<>(List.of(Path.of("../../shared/models"), Path.of("../shared/models")));
        String property = System.getProperty("kvferry.models");
        if (property != null && !property.isBlank()) candidates.add(Path.of(property));
        for (Path p : candidates) {
            if (Files.isDirectory(p)) return p;
        }
        return candidates.getFirst();
    }

    private static Path tok512() {
        Path file = modelsDir().resolve("tok512.bin");
        Assumptions.assumeTrue(Files.exists(file),
                "test tokenizer absent: " + file.toAbsolutePath().normalize() + " (set -Dkvferry.models to its folder)");
        return file;
    }

    private static Tokenizer real() throws IOException {
        return Tokenizer.load(tok512(), VOCAB);
    }

    // ---- an independent reading of the file and a literal (quadratic) run.c encode, to check against ----

    private record Vocab(byte[][] pieces, float[] scores, Map<String, Integer> ids) {
        static Vocab read(Path file, int n) throws IOException {
            ByteBuffer in = ByteBuffer.wrap(Files.readAllBytes(file)).order(ByteOrder.LITTLE_ENDIAN);
            in.getInt();
            byte[][] pieces = new byte[n][];
            float[] scores = new float[n];
            Map<String, Integer> ids = new HashMap<>();
            for (int i = 0; i < n; i++) {
                scores[i] = in.getFloat();
                pieces[i] = new byte[in.getInt()];
                in.get(pieces[i]);
                ids.putIfAbsent(latin1(pieces[i]), i);
            }
            return new Vocab(pieces, scores, ids);
        }

        int id(String piece) {
            return ids.getOrDefault(piece, -1);
        }

        List<Integer> referenceEncode(String text, boolean bos, boolean eos) {
            byte[] b = text.getBytes(StandardCharsets.UTF_8);
            List<Integer> t = new ArrayList<>();
            if (bos) t.add(Tokenizer.BOS);
            int first = t.size();
            if (b.length > 0) t.add(id(" "));
            for (int i = 0; i < b.length; ) {
                int e = i + 1;
                while (e < b.length && e - i < 4 && (b[e] & 0xC0) == 0x80) e++;
                int whole = id(new String(b, i, e - i, StandardCharsets.ISO_8859_1));
                if (whole >= 0) {
                    t.add(whole);
                } else {
                    for (int k = i; k < e; k++) t.add((b[k] & 0xFF) + 3);
                }
                i = e;
            }
            while (true) {
                float best = -1e10f;
                int bestIdx = -1, bestId = -1;
                for (int i = first; i + 1 < t.size(); i++) {
                    int m = id(latin1(pieces[t.get(i)]) + latin1(pieces[t.get(i + 1)]));
                    if (m >= 0 && scores[m] > best) {
                        best = scores[m];
                        bestIdx = i;
                        bestId = m;
                    }
                }
                if (bestIdx < 0) break;
                t.set(bestIdx, bestId);
                t.remove(bestIdx + 1);
            }
            if (eos) t.add(Tokenizer.EOS);
            return t;
        }
    }

    private static String latin1(byte[] b) {
        return new String(b, StandardCharsets.ISO_8859_1);
    }

    private static List<Integer> boxed(int[] a) {
        return Arrays.stream(a).boxed().toList();
    }

    /** Text built from vocab pieces and odd characters, so merges, ties and byte fallback all get exercised. */
    private static String randomText(Random rnd, Vocab vocab) {
        String[] extras = {" ", "\n", "é", "日", "本", "😀", "ß", "\t", "0", "9", ",", ".", "!", "\"", "’"};
        StringBuilder sb = new StringBuilder();
        int parts = rnd.nextInt(12);
        for (int i = 0; i < parts; i++) {
            if (rnd.nextInt(3) == 0) {
                sb.append(extras[rnd.nextInt(extras.length)]);
            } else {
                byte[] piece = vocab.pieces[259 + rnd.nextInt(VOCAB - 259)];
                sb.append(new String(piece, StandardCharsets.UTF_8));
            }
        }
        return sb.toString();
    }

    // ---- tok512.bin ----

    @Test
    void loadsTok512() throws IOException {
        Tokenizer tok = real();
        assertEquals(VOCAB, tok.vocabSize());
        assertEquals("\n<s>\n", latin1(tok.pieceBytes(0, Tokenizer.BOS)));
        assertEquals("\n</s>\n", latin1(tok.pieceBytes(0, Tokenizer.EOS)));
    }

    @Test
    void encodesOnceUponATimeAsRunC() throws IOException {
        Tokenizer tok = real();
        int[] ids = tok.encode("Once upon a time", true, false);
        assertEquals(Tokenizer.BOS, ids[0]);
        // BOS " Once" " upon" " a" " time": worked out with a Python transcription of run.c's encode.
        assertArrayEquals(new int[] {1, 403, 407, 261, 378}, ids);
        assertTrue(ids.length < "Once upon a time".length() / 2, "merges must shrink the sequence: " + boxed(ids));
        assertEquals("Once upon a time", tok.decode(ids));
        int[] withEos = tok.encode("Once upon a time", true, true);
        assertEquals(Tokenizer.EOS, withEos[withEos.length - 1]);
        assertEquals("Once upon a time", tok.decode(withEos));
    }

    @Test
    void roundTripsText() throws IOException {
        Tokenizer tok = real();
        for (String s : SAMPLES) {
            int[] ids = tok.encode(s, true, false);
            assertEquals(s, tok.decode(ids), "round trip of " + s + " via " + boxed(ids));
            assertTrue(Arrays.stream(ids).allMatch(id -> id >= 0 && id < VOCAB));
        }
    }

    @Test
    void nonAsciiGoesThroughByteFallback() throws IOException {
        Tokenizer tok = real();
        int[] ids = tok.encode("日本😀", false, false);
        // Neither character is a piece of this small vocab: every UTF-8 byte is its <0xXX> token.
        byte[] utf8 = "日本😀".getBytes(StandardCharsets.UTF_8);
        int[] bytes = Arrays.copyOfRange(ids, ids.length - utf8.length, ids.length);
        for (int i = 0; i < utf8.length; i++) assertEquals((utf8[i] & 0xFF) + 3, bytes[i]);
        assertEquals(" 日本😀", tok.decode(ids)); // no BOS: the dummy-prefix space stays
    }

    @Test
    void matchesLiteralRunCEncode() throws IOException {
        Tokenizer tok = real();
        Vocab vocab = Vocab.read(tok512(), VOCAB);
        Random rnd = new Random(42);
        for (int i = 0; i < 2000; i++) {
            String s = randomText(rnd, vocab);
            boolean bos = rnd.nextBoolean(), eos = rnd.nextBoolean();
            int[] ids = tok.encode(s, bos, eos);
            assertEquals(vocab.referenceEncode(s, bos, eos), boxed(ids), "encode of \"" + s + "\"");
            if (bos) assertEquals(s, tok.decode(ids), "round trip of \"" + s + "\"");
        }
        for (String s : SAMPLES) assertEquals(vocab.referenceEncode(s, true, true), boxed(tok.encode(s, true, true)));
    }

    @Test
    void emptyTextHasNoDummyPrefix() throws IOException {
        Tokenizer tok = real();
        assertArrayEquals(new int[0], tok.encode("", false, false));
        assertArrayEquals(new int[] {Tokenizer.BOS, Tokenizer.EOS}, tok.encode("", true, true));
        assertEquals("", tok.decode(new int[] {Tokenizer.BOS, Tokenizer.EOS}));
    }

    @Test
    void dummyPrefix() throws IOException {
        Tokenizer tok = real();
        Vocab vocab = Vocab.read(tok512(), VOCAB);
        int space = vocab.id(" ");
        assertTrue(space >= 0, "tok512 has a \" \" piece");
        int[] a = tok.encode("a", false, false);
        assertEquals(" a", tok.decode(a)); // no BOS, so nothing strips the prefix
        assertEquals(' ', (char) tok.pieceBytes(-1, a[0])[0], "first piece starts with the dummy space");
        assertTrue(a[0] == space || vocab.pieces[a[0]].length > 1, "the prefix or a merge of it");
        assertArrayEquals(new int[] {vocab.id(" a")}, a);
        // A character that does not merge with the space keeps the bare " " token first.
        int[] nl = tok.encode("\n", false, false);
        assertArrayEquals(new int[] {space, '\n' + 3}, nl);
    }

    @Test
    void pieceBytesStripsSpaceOnlyAfterBos() throws IOException {
        Tokenizer tok = real();
        Vocab vocab = Vocab.read(tok512(), VOCAB);
        int once = vocab.id(" Once");
        assertEquals("Once", latin1(tok.pieceBytes(Tokenizer.BOS, once)));
        assertEquals(" Once", latin1(tok.pieceBytes(Tokenizer.EOS, once)));
        assertEquals(" Once", latin1(tok.pieceBytes(-1, once)));
        assertEquals(" Once", latin1(tok.pieceBytes(once, once)));
        assertEquals("", latin1(tok.pieceBytes(Tokenizer.BOS, vocab.id(" "))));
        // <0x41> is 'A' as one raw byte; <0xE6> is the raw byte 0xE6, not its text.
        assertEquals("<0x41>", latin1(vocab.pieces[0x41 + 3]));
        assertArrayEquals(new byte[] {0x41}, tok.pieceBytes(-1, 0x41 + 3));
        assertArrayEquals(new byte[] {0x41}, tok.pieceBytes(Tokenizer.BOS, 0x41 + 3));
        assertArrayEquals(new byte[] {(byte) 0xE6}, tok.pieceBytes(-1, 0xE6 + 3));
        // A fresh array each time: callers cannot corrupt the tokenizer.
        tok.pieceBytes(-1, once)[0] = 'X';
        assertEquals(" Once", latin1(tok.pieceBytes(-1, once)));
    }

    @Test
    void outOfRangeTokensAreRejected() throws IOException {
        Tokenizer tok = real();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> tok.pieceBytes(-1, VOCAB));
        assertTrue(e.getMessage().contains("512"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> tok.pieceBytes(-1, -1));
        assertThrows(IllegalArgumentException.class, () -> tok.decode(new int[] {5, 9999}));
        assertThrows(IllegalArgumentException.class, () -> tok.textStream().push(VOCAB));
    }

    @Test
    void textStreamHoldsBackSplitCharacters() throws IOException {
        Tokenizer tok = real();
        int[] ids = tok.encode("日", true, false);
        // BOS, " ", then 日 as three byte-fallback tokens E6 97 A5.
        assertArrayEquals(new int[] {Tokenizer.BOS, tok.encode(" ", false, false)[0], 0xE6 + 3, 0x97 + 3, 0xA5 + 3}, ids);
        Tokenizer.TextStream stream = tok.textStream();
        assertEquals("", stream.push(ids[0]));
        assertEquals("", stream.push(ids[1]), "the space after BOS is stripped");
        assertEquals("", stream.push(ids[2]));
        assertEquals("", stream.push(ids[3]));
        assertEquals("日", stream.push(ids[4]));
        assertEquals("", stream.push(Tokenizer.EOS));
        assertEquals("", stream.finish());
    }

    @Test
    void textStreamConcatenationEqualsDecode() throws IOException {
        Tokenizer tok = real();
        for (String s : SAMPLES) {
            int[] ids = tok.encode(s, true, true);
            Tokenizer.TextStream stream = new Tokenizer.TextStream(tok);
            StringBuilder sb = new StringBuilder();
            for (int id : ids) sb.append(stream.push(id));
            sb.append(stream.finish());
            assertEquals(s, sb.toString());
            assertEquals(tok.decode(ids), sb.toString());
        }
    }

    @Test
    void textStreamMatchesDecodeOnArbitraryTokens() throws IOException {
        Tokenizer tok = real();
        Random rnd = new Random(7);
        for (int round = 0; round < 500; round++) {
            int[] ids = rnd.ints(rnd.nextInt(20), 0, VOCAB).toArray();
            Tokenizer.TextStream stream = tok.textStream();
            StringBuilder sb = new StringBuilder();
            for (int id : ids) sb.append(stream.push(id));
            sb.append(stream.finish());
            // The stream starts as if after BOS; decode gets that BOS explicitly.
            int[] withBos = IntStream.concat(IntStream.of(Tokenizer.BOS), IntStream.of(ids)).toArray();
            assertEquals(tok.decode(withBos), sb.toString(), "tokens " + boxed(ids));
        }
    }

    @Test
    void textStreamReplacesInvalidBytes() throws IOException {
        Tokenizer tok = real();
        Tokenizer.TextStream stream = tok.textStream();
        assertEquals("\uFFFD", stream.push(0xFF + 3)); // 0xFF is never valid UTF-8
        assertEquals("", stream.push(0xE6 + 3)); // could still start a character
        assertEquals("\uFFFDA", stream.push('A' + 3)); // it did not
        assertEquals("", stream.push(0xE6 + 3));
        assertEquals("\uFFFD", stream.finish()); // the stream ended inside a character
    }

    @Test
    void textStreamAfterAPrompt() throws IOException {
        Tokenizer tok = real();
        Vocab vocab = Vocab.read(tok512(), VOCAB);
        int once = vocab.id(" Once");
        // Continuing after a prompt token keeps the leading space; starting after BOS drops it.
        assertEquals(" Once", tok.textStream(once).push(once));
        assertEquals("Once", tok.textStream().push(once));
    }

    @Test
    void concurrentEncodesAgree() throws IOException {
        Tokenizer tok = real();
        List<int[]> expected = SAMPLES.stream().map(s -> tok.encode(s, true, false)).toList();
        IntStream.range(0, 400).parallel().forEach(i -> {
            int k = i % SAMPLES.size();
            assertArrayEquals(expected.get(k), tok.encode(SAMPLES.get(k), true, false));
        });
    }

    // ---- synthetic ----

    @Test
    void syntheticRoundTripsThroughByteFallback() {
        Tokenizer tok = Tokenizer.synthetic(512);
        assertEquals(512, tok.vocabSize());
        assertEquals("<unk>", latin1(tok.pieceBytes(-1, 0)));
        assertEquals("\n<s>\n", latin1(tok.pieceBytes(-1, Tokenizer.BOS)));
        assertEquals("\n</s>\n", latin1(tok.pieceBytes(-1, Tokenizer.EOS)));
        assertEquals("<t259>", latin1(tok.pieceBytes(-1, 259)));
        assertEquals("<t511>", latin1(tok.pieceBytes(Tokenizer.BOS, 511)));
        for (String s : SAMPLES) {
            int[] ids = tok.encode(s, true, false);
            byte[] utf8 = s.getBytes(StandardCharsets.UTF_8);
            assertEquals(utf8.length + 1, ids.length, "one byte token per byte, no dummy prefix: " + s);
            for (int i = 0; i < utf8.length; i++) assertEquals((utf8[i] & 0xFF) + 3, ids[i + 1]);
            assertEquals(s, tok.decode(ids));
            assertEquals(s, tok.decode(tok.encode(s, false, true)));
        }
        // The smallest synthetic vocab still covers every byte.
        assertEquals("é日😀", Tokenizer.synthetic(259).decode(Tokenizer.synthetic(259).encode("é日😀", true, true)));
    }

    @Test
    void syntheticNeedsRoomForTheBytes() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Tokenizer.synthetic(100));
        assertTrue(e.getMessage().contains("100"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> Tokenizer.synthetic(258));
    }

    // ---- bad files ----

    private static byte[] tokenizerBytes(int maxLen, Object... scoreAndPiece) {
        ByteBuffer b = ByteBuffer.allocate(1024).order(ByteOrder.LITTLE_ENDIAN);
        b.putInt(maxLen);
        for (int i = 0; i < scoreAndPiece.length; i += 2) {
            byte[] piece = ((String) scoreAndPiece[i + 1]).getBytes(StandardCharsets.ISO_8859_1);
            b.putFloat((Float) scoreAndPiece[i]).putInt(piece.length).put(piece);
        }
        return Arrays.copyOf(b.array(), b.position());
    }

    @Test
    void truncatedFileNamesTheFile(@TempDir Path dir) throws IOException {
        Path file = dir.resolve("short.bin");
        Files.write(file, new byte[] {7, 0, 0, 0, 1, 2});
        IOException e = assertThrows(IOException.class, () -> Tokenizer.load(file, VOCAB));
        assertTrue(e.getMessage().contains(file.toString()), e.getMessage());
        assertTrue(e.getMessage().contains("truncated"), e.getMessage());

        Path empty = dir.resolve("empty.bin");
        Files.write(empty, new byte[0]);
        e = assertThrows(IOException.class, () -> Tokenizer.load(empty, VOCAB));
        assertTrue(e.getMessage().contains(empty.toString()) && e.getMessage().contains("truncated"), e.getMessage());

        // Two good tokens, then a third whose piece runs past the end.
        byte[] good = tokenizerBytes(3, 0f, "ab", -1f, "c");
        byte[] cut = Arrays.copyOf(tokenizerBytes(3, 0f, "ab", -1f, "c", -2f, "xyz"), good.length + 10);
        Path mid = dir.resolve("mid.bin");
        Files.write(mid, cut);
        e = assertThrows(IOException.class, () -> Tokenizer.load(mid, 3));
        assertTrue(e.getMessage().contains(mid.toString()) && e.getMessage().contains("token 2"), e.getMessage());
        Path whole = dir.resolve("good.bin");
        Files.write(whole, good);
        assertEquals(2, Tokenizer.load(whole, 2).vocabSize());
    }

    @Test
    void malformedFilesAreExplained(@TempDir Path dir) throws IOException {
        Path negative = dir.resolve("negative.bin");
        ByteBuffer b = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN).putInt(4).putFloat(0f).putInt(-5);
        Files.write(negative, b.array());
        IOException e = assertThrows(IOException.class, () -> Tokenizer.load(negative, 1));
        assertTrue(e.getMessage().contains(negative.toString()) && e.getMessage().contains("negative length -5"),
                e.getMessage());

        Path negMax = dir.resolve("negmax.bin");
        Files.write(negMax, tokenizerBytes(-1, 0f, "a"));
        e = assertThrows(IOException.class, () -> Tokenizer.load(negMax, 1));
        assertTrue(e.getMessage().contains(negMax.toString()) && e.getMessage().contains("max_token_length"),
                e.getMessage());

        Path longer = dir.resolve("longer.bin");
        Files.write(longer, tokenizerBytes(2, 0f, "a", 0f, "b", 0f, "c"));
        e = assertThrows(IOException.class, () -> Tokenizer.load(longer, 2));
        assertTrue(e.getMessage().contains(longer.toString()) && e.getMessage().contains("vocab size"), e.getMessage());

        Path missing = dir.resolve("missing.bin");
        e = assertThrows(IOException.class, () -> Tokenizer.load(missing, 2));
        assertTrue(e.getMessage().contains(missing.toString()), e.getMessage());

        IllegalArgumentException iae = assertThrows(IllegalArgumentException.class, () -> Tokenizer.load(longer, 0));
        assertTrue(iae.getMessage().contains(longer.toString()), iae.getMessage());
    }

    @Test
    void smallHandWrittenVocabMergesByScore(@TempDir Path dir) throws IOException {
        // 259 specials/bytes, then " ", "a", "b", "ab", " a", "ab" scored so "ab" (-1) beats " a" (-2).
        List<Object> spec = new ArrayList<>();
        spec.addAll(List.of(0f, "<unk>", 0f, "\n<s>\n", 0f, "\n</s>\n"));
        for (int i = 0; i < 256; i++) spec.addAll(List.of(0f, String.format("<0x%02X>", i)));
        spec.addAll(List.of(0f, " ", 0f, "a", 0f, "b", -1f, "ab", -2f, " a", -3f, " ab"));
        Path file = dir.resolve("hand.bin");
        ByteBuffer buf = ByteBuffer.allocate(8192).order(ByteOrder.LITTLE_ENDIAN).putInt(6);
        for (int i = 0; i < spec.size(); i += 2) {
            byte[] piece = ((String) spec.get(i + 1)).getBytes(StandardCharsets.ISO_8859_1);
            buf.putFloat((Float) spec.get(i)).putInt(piece.length).put(piece);
        }
        Files.write(file, Arrays.copyOf(buf.array(), buf.position()));
        Tokenizer tok = Tokenizer.load(file, 265);
        // " " a b -> " " ab (score -1 beats " a" at -2) -> " ab" (-3).
        assertArrayEquals(new int[] {Tokenizer.BOS, 264}, tok.encode("ab", true, false));
        // " " a a: " a" (-2) merges first; "a a" is not a piece, so " a" a stays.
        assertArrayEquals(new int[] {263, 260}, tok.encode("aa", false, false));
        assertEquals("aa", tok.decode(tok.encode("aa", true, false)));
        // 'c' has no piece: byte fallback 0x63 + 3.
        assertArrayEquals(new int[] {259, 'c' + 3}, tok.encode("c", false, false));
    }
}
