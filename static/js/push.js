/* Turns Web Push on and off on the settings page (#push-settings).
   Permission is asked only when the person clicks the button — never on page load:
   registering the service worker and reading the current subscription ask nothing. */
(function () {
  "use strict";
  var root = document.getElementById("push-settings");
  if (!root) return;
  var button = root.querySelector("[data-push-toggle]");
  var status = root.querySelector("[data-push-status]");
  var key = root.dataset.vapidKey;
  var active = false;

  function say(name) {
    status.textContent = root.dataset[name] || name;
  }

  // Push cannot work here (now): offer e-mail, unless e-mail already reaches them.
  function offerEmail() {
    var instead = root.querySelector("[data-push-instead]");
    if (instead) instead.hidden = root.querySelector('[data-reach="email"]') !== null;
  }

  // "Nothing can reach you" is true only while push is off and no e-mail address reaches.
  function reachable(pushOn) {
    var none = root.querySelector('[data-reach="none"]');
    var pushReaches = pushOn && root.dataset.wantsPush === "true";
    if (none) none.hidden = pushReaches || root.querySelector('[data-reach="email"]') !== null;
  }

  function show(isActive) {
    active = isActive;
    root.dataset.browserActive = String(isActive);
    button.textContent = isActive ? button.dataset.labelOff : button.dataset.labelOn;
  }

  function csrfToken() {
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function keyBytes(b64url) {
    var b64 = b64url.replace(/-/g, "+").replace(/_/g, "/") +
      "=".repeat((4 - (b64url.length % 4)) % 4);
    return Uint8Array.from(atob(b64), function (c) { return c.charCodeAt(0); });
  }

  function sameKey(subscription) {
    var current = subscription.options && subscription.options.applicationServerKey;
    if (!current) return true;
    var a = new Uint8Array(current), b = keyBytes(key);
    return a.length === b.length && a.every(function (v, i) { return v === b[i]; });
  }

  function post(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify(body),
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (!response.ok) {
          var error = new Error(data.error || "HTTP " + response.status);
          error.fromServer = true;
          throw error;
        }
        return data;
      });
    });
  }

  if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) {
    button.disabled = true;
    say("msgUnsupported");
    offerEmail();
    return;
  }
  if (!key) {
    button.disabled = true;
    say("msgUnconfigured");
    return;
  }

  var ready = navigator.serviceWorker
    .register(root.dataset.swUrl, { scope: "/" })
    .then(function () { return navigator.serviceWorker.ready; });

  ready.then(function (registration) {
    return registration.pushManager.getSubscription();
  }).then(function (subscription) {
    // The server may have let the subscription go (gone, moved, deleted): then it is off.
    show(root.dataset.serverActive === "true" && subscription !== null);
  }).catch(function () {
    button.disabled = true;
    say("msgError");
    offerEmail();
  });

  async function turnOn(registration) {
    var permission = await Notification.requestPermission();
    if (permission !== "granted") {
      // "denied": blocked for the site (now or before); "default": the prompt was dismissed.
      say(permission === "denied" ? "msgBlocked" : "msgDismissed");
      offerEmail();
      return;
    }
    var subscription = await registration.pushManager.getSubscription();
    if (subscription && !sameKey(subscription)) {
      await subscription.unsubscribe();  // made with an older server key: useless now
      subscription = null;
    }
    if (!subscription) {
      subscription = await registration.pushManager.subscribe({
        userVisibleOnly: true,
        applicationServerKey: keyBytes(key),
      });
    }
    await post(root.dataset.subscribeUrl, subscription.toJSON());
    show(true);
    reachable(true);
    root.querySelector("[data-push-instead]").hidden = true;
    say("msgOn");
  }

  async function turnOff(registration) {
    await post(root.dataset.unsubscribeUrl, {});
    var subscription = await registration.pushManager.getSubscription();
    if (subscription) await subscription.unsubscribe();
    show(false);
    reachable(false);
    say("msgOff");
  }

  button.addEventListener("click", async function () {
    button.disabled = true;
    try {
      var registration = await ready;
      await (active ? turnOff(registration) : turnOn(registration));
    } catch (error) {
      // The browser's own words are technical and in its own language (a Japanese page
      // once showed "Registration failed - permission denied"): say it in the page's.
      if (window.console) console.warn("push:", error);
      // Permission granted yet subscribing refused (a private window, a browser without a
      // push service) is not "blocked": say the reasons it may have.
      if (error && error.fromServer) {
        say("msgServer");
      } else if (Notification.permission === "denied") {
        say("msgBlocked");
        offerEmail();
      } else {
        say("msgError");
        offerEmail();
      }
    } finally {
      button.disabled = false;
    }
  });
})();
