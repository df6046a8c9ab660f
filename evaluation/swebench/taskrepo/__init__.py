"""The bundled offline task repository's code: loading, rendering and validating its tasks (the data is in ../data)."""
