from globmatch import filter_paths, match

PATHS = ["README.md", "src/app/main.py", "src/app/util/text.py", "tests/test_main.py", "build/gen.py"]


def test_normalizes_windows_and_dot_prefixes():
    assert match(".\\src\\app\\main.py", "src/*/main.py")


def test_filter_with_excludes_keeps_order():
    assert list(filter_paths(PATHS, ["**.py"], ["build/**"])) == [
        "src/app/main.py",
        "src/app/util/text.py",
        "tests/test_main.py",
    ]
