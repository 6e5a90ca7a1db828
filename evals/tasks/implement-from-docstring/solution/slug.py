import re


def slugify(text: str, max_length: int = 40) -> str:
    """A URL slug of `text` (see the task's docstring)."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if len(slug) > max_length:
        cut = slug[:max_length]
        slug = cut[: cut.rfind("-")] if "-" in cut else cut
        slug = slug.rstrip("-")
    return slug or "n-a"
