from urlkit import URL, build_query, parse_query


def test_build_simple():
    assert build_query({"q": "mars rover", "page": "2"}) == "q=mars+rover&page=2"


def test_build_repeated_keys():
    assert build_query({"tag": ["a", "b"]}) == "tag=a&tag=b"
    assert build_query([("x", "1"), ("x", "2")]) == "x=1&x=2"


def test_parse():
    assert parse_query("?q=mars+rover&tag=a&tag=b&empty=") == {"q": ["mars rover"], "tag": ["a", "b"], "empty": [""]}


def test_url_round_trip():
    url = URL.parse("HTTPS://Example.com/search?q=x#top")
    assert str(url) == "https://example.com/search?q=x#top"
    assert str(url.with_query({"q": "mars rover"})) == "https://example.com/search?q=mars+rover#top"
