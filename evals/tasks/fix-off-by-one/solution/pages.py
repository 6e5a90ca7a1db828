def page(items, number, size=10):
    """Items of page `number` (from 1) when `items` is cut into pages of `size`."""
    start = (number - 1) * size
    return items[start : start + size]


def page_count(items, size=10):
    return -(-len(items) // size)
