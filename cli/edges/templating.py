"""Jinja templates in an inventory's values, rendered by ansible-core's own templating as
Ansible renders a host's variables, less what would act on the control host.

`{{ prepare_username }}`, `default()` and the other filters mean what they mean to Ansible;
`lookup()`, `query()` and `q()` raise instead of running (the pipe lookup would run a
command on the operator's machine merely by reading the inventory), and no template file
is read (`{% include %}`, `{% import %}`: there is no loader). ansible-core costs about
0.3 s to import, so it is imported only when a value holds a template.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TEMPLATE_MARKS = ("{{", "{%")
REFUSED_CALLS = ("lookup", "query", "q")


class TemplateRefusedError(ValueError):
    """A template ctl does not render, or one that fails; the message says which and why."""


class _LookupRefusedError(Exception):
    pass


def _no_lookup(*_args: Any, **_kwargs: Any) -> Any:
    raise _LookupRefusedError


def render_template(value: Any, variables: Mapping[str, Any]) -> Any:
    """`value` (text, or lists and mappings of it) with every template in it rendered with
    `variables`, whose own templates render as they are used. TemplateRefusedError on a lookup,
    an undefined variable or any other error Ansible would stop on."""
    from ansible.errors import AnsibleError  # type: ignore[import-untyped]  # noqa: PLC0415
    from ansible.template import Templar  # type: ignore[import-untyped]  # noqa: PLC0415

    templar = Templar(variables={key: _trusted(item) for key, item in variables.items()})
    # Templar.environment is deprecated in favour of overrides per call, which cannot
    # replace globals; the engine's environment is the same object, without the warning.
    environment = templar._engine.environment
    environment.globals.update(dict.fromkeys(REFUSED_CALLS, _no_lookup))
    environment.loader = None
    try:
        return templar.template(_trusted(value))
    except AnsibleError as error:
        if _caused_by_lookup(error):
            raise TemplateRefusedError(
                "uses lookup()/query(), which ctl does not run on the control host:"
                " write the value itself"
            ) from None
        reason = str(error.message).splitlines()[0] if error.message else type(error).__name__
        raise TemplateRefusedError(f"cannot be rendered: {reason}") from None


def _caused_by_lookup(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, _LookupRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _trusted(value: Any) -> Any:
    """Inventory text as Ansible holds it: trusted as a template (ansible-core 2.19 renders
    only text so tagged, as it tags what its inventory plugins read)."""
    from ansible.template import trust_as_template  # noqa: PLC0415

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, Mapping):
        return {key: _trusted(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_trusted(item) for item in value]
    return value
