uwsgi -M --http :8778 --wsgi-file /usr/local/bin/placement-api --processes 2 --threads 10
