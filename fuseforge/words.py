"""Small helpers for the sentences of plans and reports."""


def with_article(phrase: str) -> str:
    """PHRASE with its indefinite article: "a softmax", "an amax"."""
    return f"{'an' if phrase[:1].lower() in 'aeiou' else 'a'} {phrase}"
