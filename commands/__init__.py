"""CLI command modules, one per area, attaching their commands when imported (shared
groups such as ``fit`` come from :func:`sensorbench.cli.subgroup`)."""
