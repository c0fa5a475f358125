"""The Java properties reader matches java.util.Properties.load."""

import pytest

from mirrorflow.config.properties import PropertiesSyntaxError, parse_properties


def as_dict(text: str) -> dict[str, str]:
    return {e.key: e.value for e in parse_properties(text)}


@pytest.mark.parametrize(
    "line",
    ["a=b", "a = b", "a:b", "a : b", "a b", "a\tb", "  a   =   b", "a=  b", "a :b"],
)
def test_separators(line: str) -> None:
    assert as_dict(line) == {"a": "b"}


def test_only_first_separator_counts_and_value_keeps_the_rest() -> None:
    assert as_dict("a = b = c") == {"a": "b = c"}
    assert as_dict("a=:b") == {"a": ":b"}
    assert as_dict("url = tcp://host:9092") == {"url": "tcp://host:9092"}


def test_comments_and_blank_lines() -> None:
    text = "# comment\n! also a comment\n\n   # indented comment\nkey = value\n"
    assert as_dict(text) == {"key": "value"}


def test_hash_inside_a_line_is_not_a_comment() -> None:
    assert as_dict("clusters = a, b   # aliases") == {"clusters": "a, b   # aliases"}


def test_line_continuation_skips_leading_whitespace() -> None:
    text = "topics = orders, \\\n         payments, \\\n    refunds\nnext = 1"
    assert as_dict(text) == {"topics": "orders, payments, refunds", "next": "1"}


def test_even_backslashes_do_not_continue() -> None:
    assert as_dict("path = c:\\\\\nnext = 1") == {"path": "c:\\", "next": "1"}


def test_continuation_line_starting_with_hash_is_not_a_comment() -> None:
    assert as_dict("a = x\\\n  # y") == {"a": "x# y"}


def test_escapes() -> None:
    assert as_dict(r"a = tab\there\nnl\u00e9\=") == {"a": "tab\there\nnl\u00e9="}
    assert as_dict(r"my\ key\:x = v") == {"my key:x": "v"}


def test_malformed_unicode_escape() -> None:
    with pytest.raises(PropertiesSyntaxError, match="line 2"):
        parse_properties("ok = 1\nbad = \\u12")


def test_key_without_value_and_crlf() -> None:
    assert as_dict("empty\r\nother=1\rthird=2") == {"empty": "", "other": "1", "third": "2"}


def test_line_numbers_and_duplicates_kept_in_order() -> None:
    entries = parse_properties("a=1\n\n# c\nb=2\\\n  3\na=4\n")
    assert [(e.key, e.value, e.line) for e in entries] == [
        ("a", "1", 1), ("b", "23", 4), ("a", "4", 6)]
