"""A tiny template engine."""

from tinytemplate.errors import TemplateError, TemplateSyntaxError
from tinytemplate.filters import FILTERS, Markup
from tinytemplate.template import Template

__all__ = ["FILTERS", "Markup", "Template", "TemplateError", "TemplateSyntaxError"]
