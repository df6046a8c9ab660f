"""`mars.toml`: a valid file loads; every bad or missing piece is an error naming the key."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from mars_openhands.openhands.config import ConfigError, load_config

pytestmark = pytest.mark.agent

GOOD = """
[llm]
model = "openai/Qwen/Qwen3-0.6B"
base_url = "http://127.0.0.1:8000/v1"

[mars]
events_url = "http://127.0.0.1:8000/mars/v1/events"
token = "from-file"
[mars.expected_duration_s]
terminal = 5

[agent]
max_iterations = 7
tools = ["terminal"]

[workspace]
working_dir = "ws"
persistence_dir = "convs"
"""


def _write(tmp_path, text):
    (tmp_path / "ws").mkdir(exist_ok=True)
    p = tmp_path / "mars.toml"
    p.write_text(text)
    return p


def test_good_config(tmp_path, monkeypatch):
    monkeypatch.delenv("MARS_EVENTS_TOKEN", raising=False)
    cfg = load_config(_write(tmp_path, GOOD))
    assert cfg.llm.model == "openai/Qwen/Qwen3-0.6B" and cfg.llm.api_key == "EMPTY"
    assert cfg.mars.events_url.endswith("/mars/v1/events") and cfg.mars.token == "from-file"
    assert cfg.mars.expected_duration_s == {"terminal": 5.0}
    assert cfg.agent.max_iterations == 7 and cfg.agent.tools == ("terminal",)
    assert cfg.workspace.working_dir == (tmp_path / "ws").resolve()  # relative to the config file
    assert cfg.workspace.persistence_dir == (tmp_path / "convs").resolve()


def test_env_token_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("MARS_EVENTS_TOKEN", "from-env")
    assert load_config(_write(tmp_path, GOOD)).mars.token == "from-env"


def test_minimal_config_defaults(tmp_path):
    cfg = load_config(_write(tmp_path, '[llm]\nmodel = "m"\nbase_url = "http://127.0.0.1:1/v1"\n'))
    assert cfg.mars.events_url is None and cfg.workspace.working_dir == tmp_path.resolve()


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('model = "openai/Qwen/Qwen3-0.6B"\n', ""), "[llm] model: required key missing"),
    (lambda t: t.replace('"http://127.0.0.1:8000/v1"', "8000"), "[llm] base_url: expected a string"),
    (lambda t: t.replace('"http://127.0.0.1:8000/v1"', '"localhost:8000"'),
     "[llm] base_url: expected an http(s):// URL"),
    (lambda t: t.replace("max_iterations = 7", 'max_iterations = "7"'), "[agent] max_iterations: expected an integer"),
    (lambda t: t.replace("max_iterations = 7", "max_iterations = 0"), "[agent] max_iterations: must be > 0"),
    (lambda t: t.replace('tools = ["terminal"]', 'tools = ["browser"]'), "[agent] tools: unknown tool 'browser'"),
    (lambda t: t.replace("token =", "tokne ="), "[mars] tokne: unknown key"),
    (lambda t: t.replace("terminal = 5", "terminal = -1"), "[mars] expected_duration_s.terminal"),
    (lambda t: t.replace('working_dir = "ws"', 'working_dir = "missing"'), "[workspace] working_dir:"),
    (lambda t: t + "\n[extra]\nx = 1\n", "[extra]: unknown table"),
    (lambda t: t.replace("[llm]", "[lm]"), "[lm]: unknown table"),
    (lambda t: "llm = 3\n", "[llm]: expected a table"),
    (lambda t: t.replace('model = "openai', 'model = openai'), "not valid TOML"),
])
def test_bad_config_names_the_key(tmp_path, edit, message):
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, edit(GOOD)))
    assert message in str(e.value)
    assert str(tmp_path / "mars.toml") in str(e.value)


def test_missing_llm_table(tmp_path):
    with pytest.raises(ConfigError, match=r"\[llm\]: required table missing"):
        load_config(_write(tmp_path, '[agent]\nmax_iterations = 3\n'))


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml")


def test_launcher_bad_config_exits_2_naming_the_key(tmp_path, capsys):
    from mars_openhands.openhands.run import main

    bad = _write(tmp_path, GOOD.replace("max_iterations = 7", "max_iterations = -2"))
    assert main(["--config", str(bad), "-t", "x"]) == 2
    assert f"{bad}: [agent] max_iterations: must be > 0" in capsys.readouterr().err
    assert main(["--config", str(_write(tmp_path, GOOD)), "-f", str(tmp_path / "missing.md")]) == 2
    assert "--file:" in capsys.readouterr().err


def _doc_tables(doc: str) -> dict[str, set[str]]:
    """docs/config.md's key rows, per `## [table]` section: the first cell of each table row."""
    tables: dict[str, set[str]] = {}
    current = None
    for line in doc.splitlines():
        m = re.match(r"## `\[(\w+)\]`", line)
        if m:
            current = tables.setdefault(m.group(1), set())
        key = re.match(r"\| `(\w+)` \|", line)
        if key and current is not None:
            current.add(key.group(1))
    return tables


def test_every_key_the_loader_accepts_is_on_the_config_page():
    from mars_openhands.openhands.config import TABLES

    doc = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    assert _doc_tables(doc) == {table: set(keys) for table, keys in TABLES.items()}


def test_the_config_page_example_loads(tmp_path):
    doc = (Path(__file__).resolve().parents[2] / "docs" / "config.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("\n```", 1)[0]
    cfg = load_config(_write(tmp_path, example))
    assert cfg.llm.max_output_tokens == 4096 and cfg.mars.expected_duration_s == {"terminal": 5.0, "file_editor": 0.2}
    assert cfg.workspace.persistence_dir == tmp_path / ".openhands" / "conversations"
