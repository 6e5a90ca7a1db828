from shop import pricing
from shop.cart import Cart

cart = Cart()
cart.add(10.0)
cart.add(5.0)
print(cart.total(), pricing.compute_total([1.0], tax=0.0))
