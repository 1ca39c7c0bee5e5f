// printable() (core/text.h): control bytes, C1 controls and invalid UTF-8 are
// escaped, valid UTF-8 is kept, clipping marks the cut.
#include "core/text.h"

#include <gtest/gtest.h>

using futr::printable;

TEST(Printable, KeepsTextAndValidUtf8) {
  EXPECT_EQ(printable("blk.0.attn_q"), "blk.0.attn_q");
  EXPECT_EQ(printable("\xc4\xa0the \xc2\xb1 \xe4\xbd\xa0 \xf0\x9f\x98\x80"),
            "\xc4\xa0the \xc2\xb1 \xe4\xbd\xa0 \xf0\x9f\x98\x80");
}

TEST(Printable, EscapesControlsAndInvalidBytes) {
  EXPECT_EQ(printable("a\x1b[31mred\x07"), "a\\x1b[31mred\\x07");
  EXPECT_EQ(printable(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(printable("del\x7f"), "del\\x7f");
  EXPECT_EQ(printable("c1 \xc2\x9b"
                      "31m"),
            "c1 \\xc2\\x9b31m");  // U+009B is CSI on some terminals
  EXPECT_EQ(printable("bad \xff\xfe \xc0\xaf \xed\xa0\x80"), "bad \\xff\\xfe \\xc0\\xaf \\xed\\xa0\\x80");
  EXPECT_EQ(printable("cut \xe4\xbd"), "cut \\xe4\\xbd");
  EXPECT_EQ(printable("line\nnext\t"), "line\\x0anext\\x09");
  EXPECT_EQ(printable("line\nnext\t", SIZE_MAX, true), "line\nnext\t");
}

TEST(Printable, Clips) {
  EXPECT_EQ(printable(std::string(300, 'x'), 100), std::string(100, 'x') + "...");
  EXPECT_EQ(printable("abc", 3), "abc");
}
