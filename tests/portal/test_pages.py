"""The portal's pages doing their work: the endpoint flow, the delivery log,
a delivery's page, resend and recover."""
import datetime

from helpers import bearer
from plantstore.db.models import Attempt, Delivery, Subscription
from portal_helpers import add_endpoint, csrf_of, enter


def test_an_endpoint_from_adding_to_deleting(client, alice):
    csrf = enter(client, alice)
    assert "You have no endpoints yet" in client.get("/portal/endpoints").text
    response = client.post("/portal/endpoints/new", data={
        "csrf_token": csrf, "url": "http://127.0.0.1:9/hook", "bearer": "rcv-1",
        "rate_limit": "5"})
    assert response.status_code == 201 and "whsec_" in response.text
    subscription = Subscription.get()
    assert (subscription.owner_id, subscription.rate_limit) == (1, 5)
    edited = client.post(f"/portal/endpoints/{subscription.id}/edit", data={
        "csrf_token": csrf, "url": "http://127.0.0.1:9/other", "rate_limit": ""})
    assert edited.status_code == 303
    assert Subscription.get().url == "http://127.0.0.1:9/other"
    assert Subscription.get().rate_limit is None
    assert Subscription.get().bearer_token is not None  # a blank bearer keeps it
    client.post(f"/portal/endpoints/{subscription.id}/disable", data={"csrf_token": csrf})
    page = client.get("/portal/endpoints").text
    assert "disabled: disabled by its owner" in page
    refused = client.post(f"/portal/endpoints/{subscription.id}/test",
                          data={"csrf_token": csrf})
    assert refused.status_code == 409 and "enable it first" in refused.text
    client.post(f"/portal/endpoints/{subscription.id}/enable", data={"csrf_token": csrf})
    assert Subscription.get().is_active
    rotated = client.post(f"/portal/endpoints/{subscription.id}/rotate-secret",
                          data={"csrf_token": csrf})
    assert rotated.status_code == 200 and "whsec_" in rotated.text
    confirm = client.get(f"/portal/endpoints/{subscription.id}/delete")
    assert confirm.status_code == 200 and "cannot be undone" in confirm.text
    assert Subscription.select().count() == 1
    client.post(f"/portal/endpoints/{subscription.id}/delete", data={"csrf_token": csrf})
    assert Subscription.select().count() == 0


def test_a_test_event_shows_on_its_page_and_in_the_log(client, alice):
    csrf = enter(client, alice)
    subscription_id = add_endpoint(client, csrf)
    sent = client.post(f"/portal/endpoints/{subscription_id}/test", data={"csrf_token": csrf})
    assert sent.status_code == 303
    page = client.get(sent.headers["Location"])
    assert page.status_code == 200 and "plant.test" in page.text
    log = client.get("/portal/deliveries").text
    assert "plant.test" in log
    assert "No deliveries match" in client.get("/portal/deliveries?status=failed").text


def test_the_log_is_newest_first_keyset_paged_and_filtered(client, alice):
    csrf = enter(client, alice)
    first = add_endpoint(client, csrf)
    second = add_endpoint(client, csrf, url="http://127.0.0.1:9/second")
    for n in range(30):
        Delivery.create(subscription=first if n % 2 else second, message_id=f"msg_{n:02}",
                        event_type="plant.created", payload="{}",
                        status=Delivery.FAILED if n % 3 == 0 else Delivery.DELIVERED,
                        created_at=datetime.datetime(2026, 1, 1) + datetime.timedelta(hours=n))
    page = client.get("/portal/deliveries").text
    assert page.index("msg_29") < page.index("msg_28")
    assert "msg_04" not in page and 'id="older"' in page
    older = client.get("/portal/deliveries?before=" + page.split("before=")[1].split('"')[0])
    assert "msg_04" in older.text and "msg_29" not in older.text
    failed = client.get(f"/portal/deliveries?status=failed&endpoint_id={second}").text
    assert "msg_00" in failed and "msg_06" in failed and "msg_03" not in failed
    ranged = client.get("/portal/deliveries?from=2026-01-01T02:00&to=2026-01-01T04:00").text
    assert "msg_02" in ranged and "msg_03" in ranged and "msg_04" not in ranged


def test_a_delivery_page_shows_every_attempt_and_resends(client, alice):
    csrf = enter(client, alice)
    subscription_id = add_endpoint(client, csrf)
    delivery = Delivery.create(subscription=subscription_id, message_id="msg_1",
                               event_type="plant.created", payload="{}",
                               status=Delivery.FAILED, attempts=1)
    Attempt.create(delivery=delivery.id, status_code=503, duration_ms=12,
                   error="HTTP 503", response_body="busy, come back later")
    page = client.get(f"/portal/deliveries/{delivery.id}").text
    assert "HTTP 503" in page and "12 ms" in page and "busy, come back later" in page
    resent = client.post(f"/portal/deliveries/{delivery.id}/resend", data={"csrf_token": csrf})
    assert resent.status_code == 303
    assert Delivery.get_by_id(delivery.id).status == Delivery.PENDING


def test_recover_queues_what_failed_since_a_time(client, alice):
    csrf = enter(client, alice)
    subscription_id = add_endpoint(client, csrf)
    Delivery.create(subscription=subscription_id, message_id="msg_1", payload="{}",
                    event_type="plant.created", status=Delivery.FAILED)
    response = client.post(f"/portal/endpoints/{subscription_id}/recover",
                           data={"csrf_token": csrf, "since": "2020-01-01T00:00"})
    assert response.status_code == 200 and "1 failed delivery queued again" in response.text
    assert Delivery.get().status == Delivery.PENDING


def test_the_api_shows_a_delivery_and_resends_it(client, alice, bob):
    csrf = enter(client, alice)
    subscription_id = add_endpoint(client, csrf)
    delivery = Delivery.create(subscription=subscription_id, message_id="msg_1",
                               event_type="plant.created", payload="{}",
                               status=Delivery.FAILED)
    Attempt.create(delivery=delivery.id, status_code=500, duration_ms=7, error="HTTP 500")
    path = f"/webhooks/{subscription_id}/deliveries/{delivery.id}"
    shown = client.get(path, headers=bearer(alice))
    assert shown.status_code == 200
    assert shown.get_json()["attempts"][0]["status_code"] == 500
    assert client.get(path, headers=bearer(bob)).status_code == 404
    assert client.get(f"/webhooks/{subscription_id}/deliveries/x",
                      headers=bearer(alice)).status_code == 400
    assert client.post(path + "/resend", headers=bearer(bob)).status_code == 404
    resent = client.post(path + "/resend", headers=bearer(alice))
    assert resent.status_code == 202 and resent.get_json()["status"] == "pending"
    Delivery.update(status=Delivery.DELIVERED).execute()
    assert client.post(path + "/resend", headers=bearer(alice)).status_code == 409
    disabled = client.post(f"/webhooks/{subscription_id}/disable", headers=bearer(alice))
    assert disabled.status_code == 200 and disabled.get_json()["active"] is False
    assert csrf_of(client.get("/portal/endpoints"))
