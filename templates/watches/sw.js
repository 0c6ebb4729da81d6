{% load static %}/* Yasugoro's service worker (served at /sw.js, scope "/"): shows what the webpush channel
   sends, opens the listing on click (same origin only), and keeps the subscription alive when
   the browser rotates it. */
"use strict";

importScripts("{% static 'js/notification-target.js' %}");

const APPLICATION_SERVER_KEY = "{{ application_server_key|escapejs }}";
const RESUBSCRIBE_URL = "{% url 'push-resubscribe' %}";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("push", (event) => {
  let data = {};
  try {
    data = event.data ? event.data.json() : {};
  } catch (error) {
    data = {};
  }
  const title = typeof data.title === "string" && data.title ? data.title : "Yasugoro";
  const options = {
    body: typeof data.body === "string" ? data.body : "",
    // Only the path travels on; where it may lead is decided on click.
    data: { url: typeof data.url === "string" ? data.url : "/" },
    // The outbox row's dedup key: a duplicate that still arrives replaces the first,
    // silently, instead of stacking a second notification.
    renotify: false,
  };
  if (typeof data.tag === "string" && data.tag) options.tag = data.tag;
  if (typeof data.icon === "string" && data.icon.startsWith("https://")) options.icon = data.icon;
  event.waitUntil(self.registration.showNotification(title, options));
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const path = (event.notification.data || {}).url;
  const target = self.yasugoroNotificationTarget(self.location.origin, path);
  event.waitUntil((async () => {
    const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
    for (const client of windows) {
      if (client.url === target && "focus" in client) return client.focus();
    }
    return self.clients.openWindow(target);
  })());
});

function keyBytes(b64url) {
  const b64 = b64url.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (b64url.length % 4)) % 4);
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

// The browser replaced (or expired) the subscription: subscribe again and tell the server.
// The worker cannot read the CSRF token, so /push/resubscribe is authenticated by the device
// cookie (SameSite=Lax), this custom header and the Origin check instead.
self.addEventListener("pushsubscriptionchange", (event) => {
  event.waitUntil((async () => {
    let subscription = event.newSubscription;
    if (!subscription) {
      if (!APPLICATION_SERVER_KEY) return;
      subscription = await self.registration.pushManager.subscribe({
        userVisibleOnly: true,
        applicationServerKey: keyBytes(APPLICATION_SERVER_KEY),
      });
    }
    await fetch(RESUBSCRIBE_URL, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Yasugoro-Push": "resubscribe" },
      body: JSON.stringify({
        old_endpoint: event.oldSubscription ? event.oldSubscription.endpoint : null,
        subscription: subscription.toJSON(),
      }),
    });
  })());
});
