"""Ansible Vault: a file ansible-vault encrypted whole, decrypted with ansible-core's library.

Only when the operator gives ctl a password file (`--vault-password-file`, or
ANSIBLE_VAULT_PASSWORD_FILE as Ansible reads it): ctl then reads vaulted variables files
as `ansible-inventory --vault-password-file` does. The password is read as Ansible reads
it (ansible.parsing.vault.get_file_vault_secret: the file's first line, or the output of an
executable file), only once a vaulted file is met, and held in this process: never written,
logged, printed or passed to a child (ansible-playbook gets the file's path, in its
environment, and reads the password itself).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

Decrypt = Callable[[str, str], str]  # (file, its vaulted text) → the plain text


class VaultError(Exception):
    """A vaulted file (or the password file) that cannot be opened, and why."""

    def __init__(self, file: str, message: str) -> None:
        super().__init__(f"{file}: {message}")
        self.file = file
        self.message = message


def vault_decrypter(password_file: Path) -> Decrypt:
    """A function that decrypts a vaulted file's text; VaultError naming the file (or the
    password file) when it cannot."""
    vaults: list[Any] = []  # the one VaultLib, made when first needed

    def vault() -> Any:
        if not vaults:
            # Imported only with a password: ansible-core is slow to import, and typeless.
            from ansible.errors import AnsibleError  # type: ignore[import-untyped]  # noqa: PLC0415
            from ansible.parsing.dataloader import DataLoader  # type: ignore[import-untyped]  # noqa: PLC0415
            from ansible.parsing.vault import (  # type: ignore[import-untyped]  # noqa: PLC0415
                VaultLib,
                get_file_vault_secret,
            )

            try:
                secret = get_file_vault_secret(
                    filename=str(password_file), vault_id="default", loader=DataLoader()
                )
                secret.load()
            except (AnsibleError, OSError) as error:
                reason = getattr(error, "message", None) or str(error)
                raise VaultError(
                    str(password_file), f"cannot read the vault password: {reason}"
                ) from None
            vaults.append(VaultLib([("default", secret)]))
        return vaults[0]

    def decrypt(file: str, text: str) -> str:
        from ansible.errors import AnsibleError  # noqa: PLC0415

        lib = vault()
        try:
            plain: bytes = lib.decrypt(text.encode("utf-8"))
        except AnsibleError:
            raise VaultError(
                file,
                f"encrypted with ansible-vault, and the password in {password_file} does not"
                " open it",
            ) from None
        try:
            return plain.decode("utf-8")
        except UnicodeDecodeError:
            raise VaultError(file, "decrypted, it is not UTF-8 text") from None

    return decrypt
