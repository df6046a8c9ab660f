"""Template errors."""


class TemplateError(Exception):
    """Rendering failed (unknown filter, missing variable in strict mode)."""


class TemplateSyntaxError(TemplateError):
    """The template text is malformed."""
