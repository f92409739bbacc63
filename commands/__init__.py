"""CLI command modules, one per area. Each exposes ``register(cli: click.Group)``
(a module without it is a helper, e.g. :mod:`~sensorbench.commands.options`).

Shared groups (``fit``, ``decode``, ``emulate``, ``import``, ``udev``) are obtained
with :func:`sensorbench.cli.subgroup` so several modules can add to one group.
"""
