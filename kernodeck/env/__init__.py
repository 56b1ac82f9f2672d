"""The rebuilt environment: Python discovery, the wheelhouse, the rebuild itself,
and the checks of its packages and files."""
