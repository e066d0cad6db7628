"""The `colosim` command (cli/main.py): the top layer, which may use every
package below it (docs/architecture.md, "Layers")."""
