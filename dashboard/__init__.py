"""stepwatch dashboard (Streamlit). The app itself lands with the results store."""
