"""The runtime namespace; ``tensorsketch.runtime.backends`` holds the durable stores.

Other distributions add modules below this package, so it joins the namespace.
"""

__path__ = __import__("pkgutil").extend_path(__path__, __name__)
