package dev.lakemv.spark;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.util.HashMap;
import java.util.Map;
import org.apache.spark.sql.api.java.UDF4;

/**
 * SQL function {@code lakemv_json_kinds(bytes, from, path, names)}: the JSON kinds of the named fields
 * of one object, one character a name, in the order of {@code names} (comma-separated).
 *
 * <p>The object is found from byte {@code from} of the UTF-8 text {@code bytes} by {@code path}, field
 * names separated by dots ({@code payload.after}; empty: the value at {@code from} itself). A kind is
 * {@code S} a string, {@code I} an integer that fits in 64 bits, {@code D} a larger integer, {@code F} a
 * number with a fraction or exponent, {@code B} true or false, {@code N} null, {@code O} an object,
 * {@code A} an array, {@code -} absent. A {@code +} follows when the object has a field not among
 * {@code names}. The result is null when the text is not JSON up to the object's end, when the path does not
 * lead to an object, or when a name on the path or among {@code names} appears twice in its object.
 *
 * <p>Spark's JSON reader types a field leniently (a string field takes any JSON value as its text) and
 * does not say which fields were absent or which it did not ask for: this says so, for a reader to check
 * beside it. Nothing here is specific to a table or a view.
 */
public final class JsonKinds implements UDF4<byte[], Integer, String, String, String> {
    private static final long serialVersionUID = 1L;

    /** The name lakemv registers it under. */
    public static final String NAME = "lakemv_json_kinds";

    private static final JsonFactory JSON = new JsonFactory();

    /** The last names and path split, kept (one unit's SQL passes the same few literals for every row). */
    private static final class Split {
        final String names;
        final String path;
        final Map<String, Integer> index;
        final String[] steps;
        final int count;

        Split(String names, String path) {
            this.names = names;
            this.path = path;
            String[] parts = names.isEmpty() ? new String[0] : names.split(",", -1);
            this.index = new HashMap<>(parts.length * 2);
            for (int i = 0; i < parts.length; i++) {
                index.put(parts[i], i);
            }
            this.count = parts.length;
            this.steps = path.isEmpty() ? new String[0] : path.split("\\.", -1);
        }
    }

    private transient volatile Split last;

    private Split split(String names, String path) {
        Split s = last;
        if (s == null || !s.names.equals(names) || !s.path.equals(path)) {
            s = new Split(names, path);
            last = s;
        }
        return s;
    }

    private static char kind(JsonParser parser, JsonToken token) throws java.io.IOException {
        switch (token) {
            case VALUE_STRING:
                return 'S';
            case VALUE_NUMBER_INT:
                JsonParser.NumberType type = parser.getNumberType();
                return type == JsonParser.NumberType.INT || type == JsonParser.NumberType.LONG ? 'I' : 'D';
            case VALUE_NUMBER_FLOAT:
                return 'F';
            case VALUE_TRUE:
            case VALUE_FALSE:
                return 'B';
            case VALUE_NULL:
                return 'N';
            case START_OBJECT:
                parser.skipChildren();
                return 'O';
            case START_ARRAY:
                parser.skipChildren();
                return 'A';
            default:
                throw new IllegalStateException("not a value: " + token);
        }
    }

    /** The kinds of the object the parser is at (its START_OBJECT read), or null. */
    private static String kinds(JsonParser parser, Split s) throws java.io.IOException {
        char[] found = new char[s.count];
        java.util.Arrays.fill(found, '-');
        boolean other = false;
        JsonToken token;
        while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
            Integer at = s.index.get(parser.currentName());
            JsonToken value = parser.nextToken();
            if (at == null) {
                other = true;
                parser.skipChildren();
            } else if (found[at] != '-') {
                return null;
            } else {
                found[at] = kind(parser, value);
            }
        }
        if (token != JsonToken.END_OBJECT) {
            return null;
        }
        return other ? new String(found) + "+" : new String(found);
    }

    /** Follows the path from step {@code depth} in the object the parser is at (its START_OBJECT read). */
    private static String follow(JsonParser parser, Split s, int depth) throws java.io.IOException {
        if (depth == s.steps.length) {
            return kinds(parser, s);
        }
        String result = null;
        boolean seen = false;
        JsonToken token;
        while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
            boolean step = s.steps[depth].equals(parser.currentName());
            JsonToken value = parser.nextToken();
            if (!step) {
                parser.skipChildren();
            } else if (seen) {
                return null;
            } else {
                seen = true;
                if (value != JsonToken.START_OBJECT) {
                    parser.skipChildren();
                } else {
                    result = follow(parser, s, depth + 1);
                    if (result == null) {
                        return null;
                    }
                }
            }
        }
        return token == JsonToken.END_OBJECT ? result : null;
    }

    @Override
    public String call(byte[] text, Integer from, String path, String names) {
        if (text == null || from == null || path == null || names == null || from < 0 || from > text.length) {
            return null;
        }
        Split s = split(names, path);
        try (JsonParser parser = JSON.createParser(text, from, text.length - from)) {
            if (parser.nextToken() != JsonToken.START_OBJECT) {
                return null;
            }
            return follow(parser, s, 0);
        } catch (java.io.IOException | RuntimeException e) {
            return null;
        }
    }
}
