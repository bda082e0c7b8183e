"""Managing stores: inspection, export/import/copy, the command line and the MCP server.
"""
