/* Where a notification click may go: a path on this very site, nothing else — never a URL
   taken as is from a push payload. Shared by the service worker (importScripts) and the
   browser test, so the test checks the code the worker runs. */
(function (scope) {
  "use strict";
  // Backslashes, tabs, newlines and other control characters are stripped or rewritten by
  // the URL parser ("/\evil.example" becomes "//evil.example"): refuse them outright.
  var UNSAFE = /[\\\u0000-\u001f\u007f]/;

  scope.yasugoroNotificationTarget = function (origin, path) {
    var fallback = origin + "/";
    if (typeof path !== "string" || path.charAt(0) !== "/" || path.charAt(1) === "/" ||
        UNSAFE.test(path)) {
      return fallback;
    }
    var url;
    try {
      url = new URL(path, origin);
    } catch (error) {
      return fallback;
    }
    return url.origin === origin ? url.href : fallback;
  };
})(self);
