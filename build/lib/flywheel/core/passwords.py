"""Revoke a user's API tokens when their password changes.

Django tells each configured password validator of a new password (`password_changed`) once
`set_password()` has been saved: the account and admin password forms, a reset,
`changepassword`. It does not for the re-hash of the same password at login when a new Django
raises the hasher's cost, so an upgrade does not revoke every token, as comparing a stored
fingerprint of the password hash would. Registered last in AUTH_PASSWORD_VALIDATORS; it
validates nothing. Not covered: an admin who only disables password sign-in
(`set_unusable_password`), and code that writes `User.password` directly.
"""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser

from flywheel.core.services import api_token_revoke_all


class RevokeApiTokensOnPasswordChange:
    """A password "validator" that accepts every password and revokes the user's tokens once it is set."""

    def validate(self, password: str, user: AbstractBaseUser | None = None) -> None:
        return None

    def password_changed(self, password: str, user: AbstractBaseUser | None = None) -> None:
        if user is not None and user.pk is not None:
            api_token_revoke_all(user=user, reason="password changed")

    def get_help_text(self) -> str:
        return "Changing your password revokes your API tokens."
