"""The WSGI entry point gunicorn serves: ``gunicorn -c config/gunicorn.conf.py wsgi:app``."""
from plantstore import create_app

app = create_app()
