"""HTTP routes: thin functions over the package's modules."""
