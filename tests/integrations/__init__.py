"""Libraries on top of guarded connections: pandas, SQLAlchemy, and the pytest plugin."""
