"""The `ftis-node` command line (typer).

- main.py         the app: commands parse flags and configs, then call into the layers below
- inspect_cmd.py  `ftis-node inspect`: a group file's header and statistics
"""
