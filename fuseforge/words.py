"""Small helpers for the sentences of plans and reports."""


def with_article(phrase: str) -> str:
    """PHRASE with its indefinite article: "a softmax", "an amax"."""
    return f"{'an' if phrase[:1].lower() in 'aeiou' else 'a'} {phrase}"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """N and NOUN in the number N asks for: "1 op", "3 ops", "2 launches"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
