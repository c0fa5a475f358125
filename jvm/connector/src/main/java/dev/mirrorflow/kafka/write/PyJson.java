package dev.mirrorflow.kafka.write;

/**
 * JSON strings exactly as Python's {@code json.dumps} writes them by default
 * ({@code ensure_ascii=True}): {@code \" \\ \n \r \t \b \f} as such, other control characters
 * and every non-ASCII UTF-16 unit as {@code \}{@code u} and four lowercase hex digits. The span
 * records are stored by both writers and compared byte for byte.
 */
final class PyJson {

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private PyJson() {
    }

    /** Appends {@code text} as a quoted JSON string. */
    static void string(StringBuilder out, String text) {
        out.append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> {
                    if (c < 0x20 || c > 0x7e) {
                        out.append("\\u").append(HEX[(c >> 12) & 0xf]).append(HEX[(c >> 8) & 0xf])
                                .append(HEX[(c >> 4) & 0xf]).append(HEX[c & 0xf]);
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }
}
