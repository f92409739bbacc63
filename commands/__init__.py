"""CLI command modules, one per area. Each exposes ``register(cli: click.Group)``.

Shared groups (``fit``, ``decode``, ``emulate``, ``import``, ``udev``) are obtained
with :func:`sensorbench.cli.subgroup` so several modules can add to one group.
"""
