from slug import slugify

cases = {
    "Hello, World!": "hello-world",
    "  --Already--slugged--  ": "already-slugged",
    "Crème brûlée 2024": "cr-me-br-l-e-2024",
    "": "n-a",
    "!!!": "n-a",
    "ABC_def ghi": "abc-def-ghi",
}
for text, expected in cases.items():
    assert slugify(text) == expected, (text, slugify(text), expected)
long = "word " * 20
assert slugify(long) == "-".join(["word"] * 8), slugify(long)
assert slugify("abcdefghij", max_length=4) == "abcd"
assert slugify("ab cd ef", max_length=6) == "ab-cd"
print("slug: ok")
