package dev.lakemv.spark;

import org.apache.spark.sql.api.java.UDF3;

/**
 * SQL function {@code lakemv_json_closes(bytes, from, closers)}: from byte {@code from} on, is a text one
 * JSON value, then {@code closers} closing braces, and nothing else (whitespace aside)?
 *
 * <p>Spark's JSON reader ({@code from_json}) converts the first value of a text and ignores whatever
 * follows it, so {@code {"op":"c"}{"op":"d"}} reads as one change where any strict reader refuses the
 * line. This finds where the value ends by its brackets (strings and their escapes skipped; a bare
 * number, true, false or null by where it stops) and checks what follows. It does not validate the
 * JSON: the reader it accompanies does. With {@code closers} 1 it checks a Debezium payload read after
 * its line's known beginning {@code {"schema":...,"payload":}. It reads UTF-8 bytes (the SQL passes
 * {@code CAST(value AS BINARY)}): every byte of a multi-byte character is above 0x7F, so none is taken
 * for a bracket, quote or backslash.
 *
 * <p>A string holding a surrogate's escape ({@code \\uD800} to {@code \\uDFFF}) answers false too: Spark's
 * reader turns half a pair left alone into {@code ?}, where a strict reader refuses it, so such a text
 * is left to one (a whole pair, rare in a converter's output, goes with it).
 */
public final class JsonCloses implements UDF3<byte[], Integer, Integer, Boolean> {
    private static final long serialVersionUID = 1L;

    /** The name lakemv registers it under. */
    public static final String NAME = "lakemv_json_closes";

    private static boolean blank(byte c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r';
    }

    private static int skipBlank(byte[] text, int i) {
        while (i < text.length && blank(text[i])) {
            i++;
        }
        return i;
    }

    /** Whether the escape after a backslash at {@code i - 1} is {@code \\u} of a surrogate (D800-DFFF). */
    private static boolean surrogate(byte[] text, int i) {
        if (i + 4 >= text.length || text[i] != 'u' || (text[i + 1] != 'd' && text[i + 1] != 'D')) {
            return false;
        }
        byte c = text[i + 2];
        return (c >= '8' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    }

    /** The offset just past the JSON value that starts at {@code i}, or -1 (also for a surrogate escape). */
    private static int valueEnd(byte[] text, int i) {
        int n = text.length;
        if (i >= n) {
            return -1;
        }
        byte first = text[i];
        if (first != '{' && first != '[' && first != '"') {
            int start = i;
            while (i < n && !blank(text[i]) && text[i] != ',' && text[i] != '}' && text[i] != ']' && text[i] != ':'
                    && text[i] != '"' && text[i] != '{' && text[i] != '[') {
                i++;
            }
            return i > start ? i : -1;
        }
        int depth = 0;
        boolean quoted = false;
        for (; i < n; i++) {
            byte c = text[i];
            if (quoted) {
                if (c == '\\') {
                    if (surrogate(text, i + 1)) {
                        return -1;
                    }
                    i++;
                } else if (c == '"') {
                    quoted = false;
                    if (depth == 0) {
                        return i + 1;
                    }
                }
            } else if (c == '"') {
                quoted = true;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if ((c == '}' || c == ']') && --depth == 0) {
                return i + 1;
            }
        }
        return -1;
    }

    @Override
    public Boolean call(byte[] text, Integer from, Integer closers) {
        if (text == null || from == null || closers == null || from < 0) {
            return false;
        }
        int i = valueEnd(text, skipBlank(text, from));
        if (i < 0) {
            return false;
        }
        for (int k = 0; k < closers; k++) {
            i = skipBlank(text, i);
            if (i >= text.length || text[i] != '}') {
                return false;
            }
            i++;
        }
        return skipBlank(text, i) == text.length;
    }
}
