"""The serve distribution's plugin module (registered under the ``tensorsketch`` group).

Protocols will register through ``tensorsketch_serve_protocols``; nothing is contributed yet.
"""
