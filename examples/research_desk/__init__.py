"""A package of graphs that other graphs add as subgraph nodes (see ../subgraph_imported.py)."""
