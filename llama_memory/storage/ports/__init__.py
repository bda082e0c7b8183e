from .profile import ProfileChange, ProfileRows, ProfileValue, ProfileWrite  # noqa: F401
