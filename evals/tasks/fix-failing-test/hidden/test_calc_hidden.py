from calc import add, mul

for a, b in [(0, 0), (-1, 1), (10, 5), (2.5, 0.5)]:
    assert add(a, b) == a + b, (a, b, add(a, b))
    assert mul(a, b) == a * b, (a, b, mul(a, b))
print("hidden: ok")
