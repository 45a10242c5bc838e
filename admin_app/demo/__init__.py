"""The demo business system (CRM and ERP) that the hub governs in the demo and in tests."""
