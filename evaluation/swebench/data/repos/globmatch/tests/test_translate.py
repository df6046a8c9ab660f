import pytest

from globmatch import PatternError, match


@pytest.mark.parametrize(
    "path,pattern,expected",
    [
        ("setup.py", "*.py", True),
        ("src/setup.py", "*.py", False),
        ("a.txt", "?.txt", True),
        ("ab.txt", "?.txt", False),
        ("file1", "file[0-9]", True),
        ("filex", "file[!0-9]", True),
        ("file5", "file[!0-9]", False),
        ("a+b.c", "a+b.c", True),
        ("axb.c", "a+b.c", False),
    ],
)
def test_single_segment_wildcards(path, pattern, expected):
    assert match(path, pattern) is expected


@pytest.mark.parametrize(
    "path,pattern,expected",
    [
        ("src/pkg/mod.py", "src/**/*.py", True),
        ("src/a/b/c/mod.py", "src/**/*.py", True),
        ("lib/pkg/mod.py", "src/**/*.py", False),
        ("docs/a/b/index.md", "docs/**", True),
    ],
)
def test_double_star_spans_directories(path, pattern, expected):
    assert match(path, pattern) is expected


@pytest.mark.parametrize("pattern", ["", "file[0-9"])
def test_malformed_patterns(pattern):
    with pytest.raises(PatternError):
        match("x", pattern)
