def slugify(text: str, max_length: int = 40) -> str:
    """A URL slug of `text`: lower case; every run of characters other than ASCII letters and
    digits becomes one hyphen; no hyphen at either end; at most `max_length` characters, cut
    at a hyphen when there is one in the limit (and never ending in a hyphen). An empty result
    is "n-a".

    >>> slugify("Hello, World!")
    'hello-world'
    """
    raise NotImplementedError
