import pytest

from tinytemplate import Template, TemplateError, TemplateSyntaxError


def test_plain_text_and_variables():
    assert Template("Hello {{ name }}!").render(name="Ada") == "Hello Ada!"


def test_attribute_and_key_lookup():
    class User:
        name = "Grace"

    assert Template("{{ u.name }} {{ d.k }}").render(u=User(), d={"k": 1}) == "Grace 1"


def test_missing_variable_is_empty_unless_strict():
    assert Template("[{{ nope }}]").render() == "[]"
    with pytest.raises(TemplateError, match="nope"):
        Template("{{ nope }}", strict=True).render()


def test_filters_chain_with_arguments():
    out = Template("{{ tags | join: ' / ' | upper }} {{ title | truncate: 5 }}").render(
        tags=["a", "b"], title="Hello world"
    )
    assert out == "A / B Hell\u2026"


def test_for_and_if_blocks():
    source = "{% for x in items %}{% if x.on %}[{{ x.n }}]{% endif %}{% endfor %}"
    items = [{"n": 1, "on": True}, {"n": 2, "on": False}, {"n": 3, "on": True}]
    assert Template(source).render(items=items) == "[1][3]"


def test_escapes_variables_by_default():
    assert Template("<b>{{ v }}</b>").render(v="<i>&") == "<b>&lt;i&gt;&amp;</b>"


def test_safe_filter_disables_escaping():
    assert Template("{{ v | safe }}").render(v="<i>") == "<i>"


def test_autoescape_off():
    assert Template("{{ v }}", autoescape=False).render(v="<i>") == "<i>"


@pytest.mark.parametrize(
    "source",
    ["{{ x", "{% for x in y %}", "{% while x %}{% endwhile %}", "{{ }}"],
    ids=["unclosed", "missing-endfor", "unknown-block", "empty-expr"],
)
def test_syntax_errors(source):
    with pytest.raises(TemplateSyntaxError):
        Template(source)


def test_unknown_filter():
    with pytest.raises(TemplateError, match="unknown filter 'shout'"):
        Template("{{ v | shout }}").render(v="x")
