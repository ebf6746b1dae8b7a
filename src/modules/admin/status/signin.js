// The status page's sign-in form: posts the credentials as JSON to our own
// endpoint, which signs in through the accounts service and sets an HttpOnly
// cookie; the page then reloads with that cookie.

const form = document.getElementById('signin');
const errorText = document.getElementById('error');

form.addEventListener('submit', async (event) => {
  event.preventDefault();
  errorText.hidden = true;
  const button = form.querySelector('button');
  button.disabled = true;
  try {
    const response = await fetch('/admin/status/session', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      credentials: 'same-origin',
      body: JSON.stringify({ email: form.email.value, password: form.password.value }),
    });
    if (response.ok) {
      window.location.reload();
      return;
    }
    const body = await response.json().catch(() => ({}));
    errorText.textContent = body.error ?? `Sign-in failed (${response.status})`;
  } catch {
    errorText.textContent = 'The server could not be reached.';
  } finally {
    button.disabled = false;
  }
  errorText.hidden = false;
});
