from depgraph import Graph


def test_add_merges_dependencies():
    g = Graph()
    g.add("app", "web")
    g.add("app", "db")
    assert g.dependencies("app") == {"web", "db"}


def test_dependents():
    g = Graph({"app": ["web"], "cli": ["web"], "web": []})
    assert g.dependents("web") == {"app", "cli"}
