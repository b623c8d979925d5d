"""The Ansible inventory, read the way `ansible-inventory` reads it, and our host variables.

`schema` holds the models (`Inventory`, `Host`, `HostVars`, `Fabric`); `load` reads an
inventory file or directory, with its group_vars/ and host_vars/, into them.
"""
