"""One module per backend; each registers its variants when imported (see lab.registry)."""
