// The tracking script: <script defer src="https://API/script.js" data-website-id="…"></script>
// on any page. Records page views (SPA route changes included), the referrer,
// the page load time and custom events, and sends them to POST /api/analytics
// as text/plain JSON with navigator.sendBeacon (no CORS preflight, survives
// the page closing), falling back to fetch with keepalive. No cookie: the
// session id lives in sessionStorage, for the tab's life. Do Not Track and
// Global Privacy Control turn it off entirely.
(function () {
  'use strict';
  var script = document.currentScript;
  if (!script) return;
  var websiteId = script.getAttribute('data-website-id');
  if (!websiteId) return;
  if (navigator.doNotTrack === '1' || window.doNotTrack === '1' || navigator.globalPrivacyControl === true) return;

  var endpoint = (script.getAttribute('data-host-url') || new URL(script.src).origin) + '/api/analytics';
  var SESSION_KEY = 'portfolio-analytics-session';

  function sessionId() {
    try {
      var id = sessionStorage.getItem(SESSION_KEY);
      if (!id) {
        id = crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2);
        sessionStorage.setItem(SESSION_KEY, id);
      }
      return id;
    } catch (e) {
      return 'no-storage';
    }
  }

  function send(eventType, metadata, referrer) {
    var event = {
      websiteId: websiteId,
      eventType: eventType,
      page: location.pathname + location.search,
      userAgent: navigator.userAgent,
      sessionId: sessionId(),
      metadata: metadata,
    };
    if (referrer) event.referrer = referrer;
    var body = JSON.stringify(event);
    var blob = new Blob([body], { type: 'text/plain' });
    if (navigator.sendBeacon && navigator.sendBeacon(endpoint, blob)) return;
    fetch(endpoint, { method: 'POST', body: body, headers: { 'content-type': 'text/plain' }, mode: 'no-cors', keepalive: true }).catch(function () {});
  }

  function loadTimeMs() {
    var entry = performance.getEntriesByType && performance.getEntriesByType('navigation')[0];
    return entry && entry.loadEventEnd > 0 ? Math.round(entry.loadEventEnd - entry.startTime) : undefined;
  }

  function pageView(referrer, extra) {
    var metadata = { title: document.title, screen: screen.width + 'x' + screen.height, language: navigator.language };
    for (var key in extra) metadata[key] = extra[key];
    send('page_view', metadata, referrer);
  }

  var lastPage = location.pathname + location.search;
  function routeChanged() {
    var page = location.pathname + location.search;
    if (page === lastPage) return;
    var from = location.origin + lastPage;
    lastPage = page;
    pageView(from, { navigation: 'spa' });
  }
  ['pushState', 'replaceState'].forEach(function (name) {
    var original = history[name];
    history[name] = function () {
      var result = original.apply(this, arguments);
      routeChanged();
      return result;
    };
  });
  window.addEventListener('popstate', routeChanged);

  // Custom events: <button data-event="signup" data-event-plan="pro">, or portfolioAnalytics.track(name, data).
  document.addEventListener(
    'click',
    function (event) {
      var element = event.target instanceof Element ? event.target.closest('[data-event]') : null;
      if (!element) return;
      var data = { event: element.getAttribute('data-event') };
      for (var i = 0; i < element.attributes.length; i += 1) {
        var attribute = element.attributes[i];
        if (attribute.name.indexOf('data-event-') === 0) data[attribute.name.slice('data-event-'.length)] = attribute.value;
      }
      send('custom', data);
    },
    true,
  );
  window.portfolioAnalytics = {
    track: function (name, data) {
      var metadata = { event: String(name) };
      for (var key in data || {}) metadata[key] = data[key];
      send('custom', metadata);
    },
  };

  // The first page view waits for the load event, so it carries the load time.
  function first() {
    setTimeout(function () {
      pageView(document.referrer || undefined, { loadTime: loadTimeMs() });
    }, 0);
  }
  if (document.readyState === 'complete') first();
  else window.addEventListener('load', first, { once: true });
})();
