"""anvilctl: the companion CLI of anvild (a 9P client plus ergonomic session commands)."""
