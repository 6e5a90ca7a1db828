def page(items, number, size=10):
    """Items of page `number` (from 1) when `items` is cut into pages of `size`."""
    start = number * size
    return items[start : start + size - 1]


def page_count(items, size=10):
    return len(items) // size
