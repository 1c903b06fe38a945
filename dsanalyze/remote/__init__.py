"""Data on the other side of a network: servers in a namespace behind a shaped link."""
