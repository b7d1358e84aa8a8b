"""The eval distribution's plugin module (registered under the ``tensorsketch`` group).

Graders will register through ``tensorsketch_graders``; nothing is contributed yet.
"""
