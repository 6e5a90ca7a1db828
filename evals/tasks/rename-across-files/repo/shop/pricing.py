def calc_total(prices, tax=0.2):
    """The sum of `prices` with `tax` added, rounded to cents."""
    return round(sum(prices) * (1 + tax), 2)
