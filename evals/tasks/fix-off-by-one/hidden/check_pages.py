from pages import page, page_count

items = list(range(25))
assert page(items, 1) == list(range(10)), page(items, 1)
assert page(items, 2) == list(range(10, 20))
assert page(items, 3) == [20, 21, 22, 23, 24]
assert page(items, 4) == []
assert page(items, 1, size=4) == [0, 1, 2, 3]
assert page_count(items) == 3, page_count(items)
assert page_count([]) == 0
assert page_count(list(range(20))) == 2
print("pages: ok")
