"""The WSGI entry point gunicorn serves: ``plantstore web`` runs
``gunicorn -c config/gunicorn.conf.py wsgi:app``."""
from plantstore import create_app

app = create_app()
