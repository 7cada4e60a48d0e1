"""HTTP routes: thin functions over the package's modules, one module per resource."""
